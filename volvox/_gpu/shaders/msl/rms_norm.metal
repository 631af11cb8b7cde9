#pragma clang diagnostic ignored "-Wmissing-prototypes"
#pragma clang diagnostic ignored "-Wmissing-braces"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

template<typename T, size_t Num>
struct spvUnsafeArray
{
    T elements[Num ? Num : 1];
    
    thread T& operator [] (size_t pos) thread
    {
        return elements[pos];
    }
    constexpr const thread T& operator [] (size_t pos) const thread
    {
        return elements[pos];
    }
    
    device T& operator [] (size_t pos) device
    {
        return elements[pos];
    }
    constexpr const device T& operator [] (size_t pos) const device
    {
        return elements[pos];
    }
    
    constexpr const constant T& operator [] (size_t pos) const constant
    {
        return elements[pos];
    }
    
    threadgroup T& operator [] (size_t pos) threadgroup
    {
        return elements[pos];
    }
    constexpr const threadgroup T& operator [] (size_t pos) const threadgroup
    {
        return elements[pos];
    }
};

struct _5
{
    uint _m0;
    uint _m1;
    float _m2;
};

struct _11
{
    float _m0[1];
};

struct _14
{
    float _m0[1];
};

struct _17
{
    float _m0[1];
};

struct _20
{
    _5 _m0;
};

constant spvUnsafeArray<float, 64> _24 = spvUnsafeArray<float, 64>({ 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 });

kernel void main0(const device _11& _10 [[buffer(0)]], const device _14& _13 [[buffer(1)]], device _17& _16 [[buffer(2)]], const device _20& _19 [[buffer(3)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _47 = 0.0;
    uint _52 = 32u;
    uint2 _81 = uint2(4294967295u);
    uint2 _123 = uint2(4294967295u);
    uint2 _169 = uint2(4294967295u);
    threadgroup float _22[64];
    uint _60 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_60 >= _19._m0._m0)
    {
        return;
    }
    uint _69 = _19._m0._m1;
    uint _70 = _60 * _69;
    uint _49 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _81))
        {
            break;
        }
        _81 -= uint2(uint(_81.y == 0u), 1u);
        if (!(_49 < _19._m0._m1))
        {
            break;
        }
        _47 += (_10._m0[_70 + _49] * _10._m0[_70 + _49]);
        _49 += 64u;
        continue;
    }
    _22[gl_LocalInvocationIndex] = _47;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _123))
        {
            break;
        }
        _123 -= uint2(uint(_123.y == 0u), 1u);
        if (!(_52 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _52)
        {
            _22[gl_LocalInvocationIndex] += _22[gl_LocalInvocationIndex + _52];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _52 = _52 >> 1u;
        continue;
    }
    float _164 = 1.0 / sqrt((_22[0u] / float(_19._m0._m1)) + _19._m0._m2);
    uint _53 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _169))
        {
            break;
        }
        _169 -= uint2(uint(_169.y == 0u), 1u);
        if (!(_53 < _19._m0._m1))
        {
            break;
        }
        _16._m0[_70 + _53] = (_10._m0[_70 + _53] * _164) * _13._m0[_53];
        _53 += 64u;
        continue;
    }
}

