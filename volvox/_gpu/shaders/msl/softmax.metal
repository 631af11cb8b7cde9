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
    _5 _m0;
};

constant spvUnsafeArray<float, 64> _21 = spvUnsafeArray<float, 64>({ 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 });

kernel void main0(const device _11& _10 [[buffer(0)]], device _14& _13 [[buffer(1)]], const device _17& _16 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _44 = -3.0000000054977557577780399428115e+38;
    uint _49 = 32u;
    float _50 = 0.0;
    uint _53 = 32u;
    uint2 _82 = uint2(4294967295u);
    uint2 _122 = uint2(4294967295u);
    uint2 _159 = uint2(4294967295u);
    uint2 _197 = uint2(4294967295u);
    uint2 _235 = uint2(4294967295u);
    threadgroup float _19[64];
    uint _61 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_61 >= _16._m0._m0)
    {
        return;
    }
    uint _70 = _16._m0._m1;
    uint _71 = _61 * _70;
    uint _46 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _82))
        {
            break;
        }
        _82 -= uint2(uint(_82.y == 0u), 1u);
        if (!(_46 < _16._m0._m1))
        {
            break;
        }
        _44 = fast::max(_44, _16._m0._m2 * _10._m0[_71 + _46]);
        _46 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _44;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _122))
        {
            break;
        }
        _122 -= uint2(uint(_122.y == 0u), 1u);
        if (!(_49 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _49)
        {
            _19[gl_LocalInvocationIndex] = fast::max(_19[gl_LocalInvocationIndex], _19[gl_LocalInvocationIndex + _49]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _49 = _49 >> 1u;
        continue;
    }
    float _154 = _19[0u];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint _51 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _159))
        {
            break;
        }
        _159 -= uint2(uint(_159.y == 0u), 1u);
        if (!(_51 < _16._m0._m1))
        {
            break;
        }
        _50 += exp((_16._m0._m2 * _10._m0[_71 + _51]) - _154);
        _51 += 64u;
        continue;
    }
    _19[gl_LocalInvocationIndex] = _50;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _197))
        {
            break;
        }
        _197 -= uint2(uint(_197.y == 0u), 1u);
        if (!(_53 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _53)
        {
            _19[gl_LocalInvocationIndex] += _19[gl_LocalInvocationIndex + _53];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _53 = _53 >> 1u;
        continue;
    }
    float _230 = 1.0 / _19[0u];
    uint _54 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _235))
        {
            break;
        }
        _235 -= uint2(uint(_235.y == 0u), 1u);
        if (!(_54 < _16._m0._m1))
        {
            break;
        }
        _13._m0[_71 + _54] = exp((_16._m0._m2 * _10._m0[_71 + _54]) - _154) * _230;
        _54 += 64u;
        continue;
    }
}

