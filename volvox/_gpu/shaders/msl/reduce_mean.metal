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

struct _4
{
    uint _m0;
    uint _m1;
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
    _4 _m0;
};

constant spvUnsafeArray<float, 64> _21 = spvUnsafeArray<float, 64>({ 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 });

kernel void main0(const device _11& _10 [[buffer(0)]], device _14& _13 [[buffer(1)]], const device _17& _16 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _42 = 0.0;
    uint _47 = 32u;
    uint2 _71 = uint2(4294967295u);
    uint2 _111 = uint2(4294967295u);
    threadgroup float _19[64];
    uint _53 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_53 >= _16._m0._m0)
    {
        return;
    }
    uint _44 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _71))
        {
            break;
        }
        _71 -= uint2(uint(_71.y == 0u), 1u);
        if (!(_44 < _16._m0._m1))
        {
            break;
        }
        _42 += _10._m0[(_53 * _16._m0._m1) + _44];
        _44 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _42;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _111))
        {
            break;
        }
        _111 -= uint2(uint(_111.y == 0u), 1u);
        if (!(_47 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _47)
        {
            _19[gl_LocalInvocationIndex] += _19[gl_LocalInvocationIndex + _47];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _47 = _47 >> 1u;
        continue;
    }
    if (gl_LocalInvocationIndex == 0u)
    {
        _13._m0[_53] = _19[0u] / float(_16._m0._m1);
        return;
    }
    else
    {
        return;
    }
}

